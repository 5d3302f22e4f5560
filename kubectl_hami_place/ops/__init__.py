"""What the commands do: creating, following and executing placements, reading the live cluster,
and rendering clusters, plans and rooms. Imports no command (.importlinter)."""
