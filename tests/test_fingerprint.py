import sys
from importlib import metadata

from vitexport.fingerprint import fingerprint


def test_fingerprint_describes_the_machine_without_naming_it():
    import socket

    fp = fingerprint(threads=2)
    assert fp["cpu"] and fp["logical_cores"] >= 1 and fp["usable_cores"] >= 1
    assert fp["python"] == ".".join(map(str, sys.version_info[:3]))
    assert fp["libraries"]["numpy"] == metadata.version("numpy")
    assert fp["threads"] == 2 and fp["gpus"]
    assert socket.gethostname() not in str(fp)
