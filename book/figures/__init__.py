"""Figures drawn from code at build time (simulators, diagrams), one module per chapter."""
