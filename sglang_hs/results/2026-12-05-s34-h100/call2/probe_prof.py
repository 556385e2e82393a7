"""Scratch (s34): cProfile of probe_host's cached question, 60 rows by own time and 40 by cumulative time."""
import cProfile, pstats, sys
from sglang_hs import probe_host as ph
args = ph.parse(sys.argv[1:])
backend, locs = ph.build(args)
question = ph.steps(args, backend, locs)["question, hs"]
for _ in range(3):
    question()
p = cProfile.Profile()
p.runcall(lambda: [question() for _ in range(5)])
ph.sync(args.device)
s = pstats.Stats(p).strip_dirs()
s.sort_stats("tottime").print_stats(60)
s.sort_stats("cumulative").print_stats(40)
