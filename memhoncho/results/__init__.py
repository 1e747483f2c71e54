"""Results: every memhoncho task's last start, success and error, and its counts."""
