"""What keeps a person's secrets out of memory: redaction of key shapes wherever text enters
(capture, the recall tools, imports through capture)."""
