"""Folder that goes on PYTHONPATH for CPU runs: holds the ``sgl_kernel`` placeholder package."""

import os

PATH = os.path.dirname(os.path.abspath(__file__))
