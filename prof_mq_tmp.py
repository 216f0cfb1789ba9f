import cProfile, pstats, sys, time
from bench.manyqueries import Workload, run_jindou
wl = Workload(1000, 10, 1000.0, 11)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
pr = cProfile.Profile()
import engine.stream.scheduler as S
orig = S.Scheduler._step
def step(self):
    pr.enable()
    try:
        return orig(self)
    finally:
        pr.disable()
S.Scheduler._step = step
t0=time.time()
out = run_jindou(wl, n, 11, True, set())
print(out["per_s"], out["wall_s"], time.time()-t0)
st = pstats.Stats(pr); st.sort_stats("cumulative").print_stats(45)
