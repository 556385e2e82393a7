import click


class PrepError(click.ClickException):
    """A user-facing failure: click prints it as one line and exits with status 1."""
