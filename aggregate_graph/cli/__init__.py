"""The `aggregate-graph` command.

main.py      the command and `ask`
serve.py     its server commands: `serve-aggregator` (engines in `aggregate_graph.serve`) and `proxy`
demo.py      `python -m aggregate_graph.cli.demo`: the offline demo over the sample sets in `data/`
common.py    what the commands share with `aggregate-train`: errors told as `error:`/`hint:` lines, versions
"""
