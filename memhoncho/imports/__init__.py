"""Reading what other software recorded into memhoncho's runs: Claude Code's transcripts
(``claude_code``, shared with the Claude Code hooks) and exports."""
