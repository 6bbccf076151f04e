"""Message graphs (DAGs over the team's agents)."""
