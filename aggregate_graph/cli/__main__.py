"""`python -m aggregate_graph.cli`: the `aggregate-graph` command."""

from aggregate_graph.cli.main import main

raise SystemExit(main())
