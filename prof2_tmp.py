import sys, time
from bench.manyqueries import Workload, run_jindou
wl = Workload(1000, 10, 1000.0, 11)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
for i in range(2):
    out = run_jindou(wl, n, 11, True, set())
    print(n, round(out["per_s"]), round(out["wall_s"], 3), round(out["per_cpu_s"]), round(out["cpu_s"],3), flush=True)
