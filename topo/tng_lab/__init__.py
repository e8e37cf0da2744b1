"""tng lab: topologies, the link emulator front end, the scenario runner and the repository test runner."""
