"""The hs-prep command line."""
import json
import os
import signal
import sys

# The per-head matrices are small: OpenBLAS threads gain little and, on a busy machine, their spinning
# made ranking 8x slower (measured on 2 cores). Set before numpy loads; the caller may override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click

from hs_prep.convert import REPORT_JSON, SELECTIONS, ConvertOptions, convert
from hs_prep.errors import PrepError
from hs_prep.inspect_prepared import format_table, inspect
from hs_prep.rank import AGGREGATES
from hs_prep.source import resolve

DTYPES = ("float32", "float64", "bfloat16", "float16")


def _terminate(signum, frame):  # let `finally` blocks remove partial output on SIGTERM too
    raise SystemExit(128 + signum)


@click.group()
def main():
    """Prepare Hugging Face checkpoints for HieraSparse serving (AoH head ranking and permutation)."""
    signal.signal(signal.SIGTERM, _terminate)


@main.command("convert")
@click.argument("model", required=False)
@click.option("--output", "-o", required=True, type=click.Path(), help="Directory to write the prepared checkpoint to.")
@click.option("--retrieval-ratio", type=float, default=None, help="Fraction of KV groups per layer kept as retrieval groups (0, 1]. Default 0.5.")
@click.option("--sparsity", type=float, default=None, help="Alternative to --retrieval-ratio: fraction of streaming groups [0, 1).")
@click.option("--aggregate", type=click.Choice(sorted(AGGREGATES)), default="mean", show_default=True, help="How query-head ranks combine into a KV-group score.")
@click.option("--rope-aware", is_flag=True, help="Rank with RoPE-aware effective rank (paper eq. 9) and report its Spearman agreement with vanilla.")
@click.option("--rope-max-distance", type=click.IntRange(1), default=32768, show_default=True, help="Largest relative distance for --rope-aware.")
@click.option("--tp-size", type=click.IntRange(1), default=1, show_default=True, help="Tensor-parallel size to balance retrieval groups for.")
@click.option("--select", "selection", type=click.Choice(SELECTIONS), default="aoh", show_default=True, help="aoh: lowest effective rank are retrieval groups; random / reverse: the paper's controls.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --select random.")
@click.option("--revision", default=None, help="Hub revision (branch, tag or commit) when MODEL is a hub id.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output directory (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def convert_command(model, output, retrieval_ratio, sparsity, aggregate, rope_aware, rope_max_distance, tp_size,
                    selection, seed, revision, overwrite, as_json):
    """Prepare MODEL (hub id, local directory, a .gguf file, or omitted / "embedded" for the demo SmolLM2) into OUTPUT."""
    if retrieval_ratio is not None and sparsity is not None:
        raise PrepError("give --retrieval-ratio or --sparsity, not both")
    if sparsity is not None:
        if not 0 <= sparsity < 1:
            raise PrepError(f"--sparsity must be in [0, 1), got {sparsity}")
        retrieval_ratio = 1 - sparsity
    ratio = 0.5 if retrieval_ratio is None else retrieval_ratio
    if not 0 < ratio <= 1:
        raise PrepError(f"--retrieval-ratio must be in (0, 1], got {ratio}")
    options = ConvertOptions(ratio, aggregate, rope_aware, rope_max_distance, tp_size, overwrite, selection, seed)
    source = resolve(model, revision)
    convert(source, output, options)
    _show(inspect(output), as_json)
    if not as_json:
        click.echo(f"prepared checkpoint written to {output} (report: {REPORT_JSON}, heat map: hs_report.png)")


@main.command("verify")
@click.argument("original")
@click.argument("prepared", type=click.Path())
@click.option("--dtype", type=click.Choice(DTYPES), default="float32", show_default=True, help="dtype both models are loaded in.")
@click.option("--atol", type=float, default=1e-3, show_default=True, help="Largest |logit difference| accepted.")
@click.option("--json", "as_json", is_flag=True)
def verify_command(original, prepared, dtype, atol, as_json):
    """Check that PREPARED computes the same logits as ORIGINAL and that its permutation undoes exactly."""
    import torch

    from hs_prep.verify import verify

    result = verify(resolve(original).path, prepared, getattr(torch, dtype), atol)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(
            f"permutation {'ok' if result['permutation_ok'] else 'BROKEN'}; max |dlogit| "
            f"{result['max_abs_logit_diff']:.3g} (atol {atol}); argmax agreement {result['argmax_agreement']:.4f} "
            f"over {result['tokens']} tokens: {'OK' if result['ok'] else 'FAILED'}"
        )
        for problem in result["permutation_problems"]:
            click.echo(f"  {problem}")
    sys.exit(0 if result["ok"] else 1)


@main.command("inspect")
@click.argument("prepared", type=click.Path())
@click.option("--json", "as_json", is_flag=True)
def inspect_command(prepared, as_json):
    """Show the per-layer retrieval/streaming split and effective ranks of PREPARED."""
    _show(inspect(prepared), as_json)


def _show(report: dict, as_json: bool) -> None:
    click.echo(json.dumps(report, indent=2) if as_json else format_table(report))
