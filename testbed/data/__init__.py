"""What is put on a test bed or fed to the planner: fake GPU nodes, workloads, placements, the openb
trace replay and seeded hostile annotations."""
