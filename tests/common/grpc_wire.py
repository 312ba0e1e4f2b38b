"""The few bytes of protobuf that the grpcio checks and the grpcio bench
speak by hand (no generated stubs): `StartRequest` built, `StartResponse`
events read."""


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """One length-delimited field."""
    return bytes([number << 3 | 2]) + varint(len(payload)) + payload


def read_varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def start_request(*argv):
    """StartRequest{config: ProcessConfig{command: argv}}."""
    return field(1, b"".join(field(1, a.encode()) for a in argv))


def event(message):
    """A StartResponse as (field number, payload): 1 init, 2 stdout, 3 stderr, 4 exit."""
    if not message:
        return 0, b""
    number = message[0] >> 3
    length, at = read_varint(message, 1)
    return number, message[at:at + length]
