"""How a worker group's ranks split the work beyond data parallel (Ulysses sequence parallel)."""
