"""Reports of the leaderboard: a self-contained HTML page, a Markdown summary, CSV tables and the
terminal table.

``inputs``        load leaderboard inputs: bundled HELM data, a results folder, the database
``render``        the HTML page, and ``write_report`` for the whole report folder
``markdown``      the Markdown summary; ``csv_tables``: the CSV tables; ``terminal``: the table
                  the CLI prints
``cells``         number formats and the leaderboard's columns, shared by every format
``groups``        the board's lines: one entry per architecture, its names under it
``stack_tables``  models and workloads under several reference stacks; the stacks' errors
``current_tables`` the columns of today's models and of providers' prices, in every format
``svg``           inline SVG charts; ``load``: serving under load (latency vs throughput)
"""
