"""The public switch: enabling a client, its keyword and URI options."""
