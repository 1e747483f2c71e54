"""``memhoncho mcp``: memory for every MCP client, saves durable and exactly once.

command.py is the CLI's side (its options, and running a transport), server.py the MCP server
over a ``Host``, save.py the save tool, scope.py whose conversation a name means, auth.py the
HTTP bearer tokens. Only command.run loads the ``mcp`` SDK (the ``memhoncho[mcp]`` extra).
"""
