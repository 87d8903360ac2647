"""The SRE dashboard (Dash + plotly) over the fleetwatch store."""
