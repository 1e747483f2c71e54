"""The ways in from other software: one module per agent framework, and the MCP server.

Each loads its framework (an optional extra) only when used: ``import memhoncho`` loads none.
"""
