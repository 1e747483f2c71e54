"""Claude Code, natively: ``memhoncho claude-code install`` writes hooks that capture each
finished turn of every session from its transcript (``imports.claude_code``), through the
relay, and print the prompt sections at ``SessionStart``. ``hook`` is the light command Claude
Code runs; ``handler`` does the work (in the relay, or in-process); ``cursor`` keeps each
session's place; ``settings_file`` edits Claude Code's settings; ``command`` is the CLI."""
