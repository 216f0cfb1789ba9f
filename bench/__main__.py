"""`python -m bench sparql ...` / `python -m bench lubm ...` / `python -m bench citybench ...` and
the subcommands below, each its own module (imported only when asked for)."""

import importlib
import sys

from bench.runner import main

#: subcommand -> (module with a ``main(argv)``, what it measures; None: not listed in --help)
SUBCOMMANDS = {
    "stream-load": ("bench.stream_load", None),
    "result-latency": ("bench.result_latency", None),
    "pipeline": ("bench.pipeline_bench", None),
    "streams": ("bench.streams", "per-window latency of continuous queries, Jindou vs peers"),
    "manyqueries": ("bench.manyqueries", "executions/s of many continuous queries of one shape, batched vs not"),
    "formats": ("bench.formats", "load and write time per RDF format, Jindou vs its old rdflib path and pyoxigraph"),
    "http-load": ("bench.http_load", "selective queries over HTTP and concurrent clients, Jindou vs oxigraph serve"),
}


def _main(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]][0]).main(argv[1:])
    if not argv or argv[0] in ("-h", "--help", "help"):
        code = main(argv)
        for name, (_, what) in SUBCOMMANDS.items():
            if what is not None:
                print(f"  {name}  {what} (python -m bench {name} --help)")
        return code
    return main(argv)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
