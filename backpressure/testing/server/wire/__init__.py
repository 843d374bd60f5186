"""Sans-I/O wire protocol: parse requests and pack replies, no sockets."""
