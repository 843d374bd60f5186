"""What each member presents: topology and hello, member state, server-level commands, replies."""
