"""The base every layer stands on: errors, atomic IO, paths, devices, output folders, figures, statistics."""
