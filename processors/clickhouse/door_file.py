"""The SQL door's options and door file (shared with every reader: :mod:`agl_stream.client.sql_door`)."""

from agl_stream.client.sql_door import (
    DOOR_USER,
    TOKEN_ENV,
    DoorAddress,
    DoorOptions,
    door_file,
    engine_directory,
    read_door_file,
    remove_door_file,
    write_door_file,
)

__all__ = [
    "DOOR_USER",
    "TOKEN_ENV",
    "DoorAddress",
    "DoorOptions",
    "door_file",
    "engine_directory",
    "read_door_file",
    "remove_door_file",
    "write_door_file",
]
