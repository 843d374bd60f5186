"""The asyncio transport: listening sockets, connections, the per-request pipeline."""
