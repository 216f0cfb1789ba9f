"""`python -m bench sparql ...` / `python -m bench lubm ...` / `python -m bench citybench ...` /
`python -m bench streams ...`."""

import sys

from bench.runner import main


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "stream-load":
        from bench.stream_load import main as stream_load_main  # noqa: PLC0415

        return stream_load_main(argv[1:])
    if argv and argv[0] == "pipeline":
        from bench.pipeline_bench import main as pipeline_main  # noqa: PLC0415

        return pipeline_main(argv[1:])
    if argv and argv[0] == "http-load":
        from bench.http_load import main as http_load_main  # noqa: PLC0415

        return http_load_main(argv[1:])
    if argv and argv[0] == "streams":
        from bench.streams import main as streams_main  # noqa: PLC0415

        return streams_main(argv[1:])
    if not argv or argv[0] in ("-h", "--help", "help"):
        code = main(argv)
        print("  streams  per-window latency of continuous queries, Jindou vs peers "
              "(python -m bench streams --help)")
        return code
    return main(argv)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
