"""File formats the conversation domain reads and writes: OLLM CLI session files, ollm-site archives,
and the checks they share."""
