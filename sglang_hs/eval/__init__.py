"""hs-eval: offline, reproducible long-context quality evaluation (passkey + RULER-style needles).

Light at import time: SGLang is imported only by the in-process runner (``runner.EngineClient``).
"""
