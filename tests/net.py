import socket


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now (for a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
