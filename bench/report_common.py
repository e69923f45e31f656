"""What the report scripts share: the geometric mean, and the tuning wall
times run_*_tuned.sh writes ('name|milliseconds' lines)."""
import math


def geomean(xs):
    """The geometric mean of the values given (None and 0 left out; None
    when none is left)."""
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def tune_walls(path):
    """{case name: seconds} from a walls file; {} without one."""
    walls = {}
    if path:
        for line in open(path):
            nm, _, ms = line.rstrip("\n").rpartition("|")
            walls[nm] = int(ms) / 1000.0
    return walls
