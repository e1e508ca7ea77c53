"""Taking aggregate results apart through the API: ``x.name``, ``x[i]``, ``Len`` (SPEC §2.3, §3.5).

Expected values are worked out by hand from the event list below.
"""

from __future__ import annotations

from tests.serving.helpers import client_for

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string
amount := $.amount as float
prev := Latest(ip, amount by user exclusive)
prev_amount := prev.amount
prev_ip := prev.ip
recent := Sequence(ip by user limit 3)
last_ip := recent[-1]
first_ip := recent[0]
third_ip := recent[2]
before_first := recent[-4]
n_recent := Len(recent)
n_recent_alias := Length(recent)
pairs := Set(ip, user limit 5)
first_pair_ip := pairs[0][0]
last_pair_user := pairs[-1][-1]
n_pairs := Len(pairs)
seq := Sequence(ip, amount by user limit 2)
older_amount := seq[0].amount
back := 2
back_ip := recent[Len(recent) - back]
bigger := prev.amount < amount
"""

T = "2021-04-12T22:4{}:00Z"
EVENTS = [
    {"_type": "login", "_time": T.format(0), "user": "anna", "ip": "1.1.1.1", "amount": 10},
    {"_type": "login", "_time": T.format(1), "user": "brad", "ip": "2.2.2.2", "amount": 20},
    {"_type": "login", "_time": T.format(2), "user": "anna", "ip": "3.3.3.3", "amount": 30},
    {"_type": "login", "_time": T.format(3), "user": "anna", "ip": "1.1.1.1", "amount": 5.5},
    {"_type": "login", "_time": T.format(4), "user": "anna", "ip": "4.4.4.4", "amount": 50},
    {"_type": "login", "_time": T.format(5), "user": "çara😀", "ip": "0.0.0.0", "amount": 1},
    {"_type": "login", "_time": T.format(6), "user": "çara😀", "ip": "é", "amount": 2},
]


def _run(redis_url):
    """Post :data:`EVENTS` in order; return each response's features (no feature may record an error)."""
    with client_for(TOPOLOGY, redis_url) as c:
        r = c.post("/batch", json=EVENTS)
    assert r.status_code == 200, r.text
    assert all("errors" not in resp for resp in r.json()), r.json()
    return [resp["features"] for resp in r.json()]


def test_struct_field_access(redis_url):
    out = _run(redis_url)
    col = lambda name: [f[name] for f in out]  # noqa: E731
    # Latest(ip, amount by user exclusive): the user's previous login
    assert col("prev") == [
        None, None,
        {"ip": "1.1.1.1", "amount": 10.0},
        {"ip": "3.3.3.3", "amount": 30.0},
        {"ip": "1.1.1.1", "amount": 5.5},
        None,
        {"ip": "0.0.0.0", "amount": 1.0},
    ]
    assert col("prev_amount") == [None, None, 10.0, 30.0, 5.5, None, 1.0]
    assert col("prev_ip") == [None, None, "1.1.1.1", "3.3.3.3", "1.1.1.1", None, "0.0.0.0"]
    # null propagates through the comparison when there is no previous login
    assert col("bigger") == [None, None, True, False, True, None, True]
    # Sequence(ip, amount by user limit 2): items are structs, oldest first
    assert col("older_amount") == [10.0, 20.0, 10.0, 30.0, 5.5, 1.0, 1.0]


def test_array_index_and_len(redis_url):
    out = _run(redis_url)
    col = lambda name: [f[name] for f in out]  # noqa: E731
    # Sequence(ip by user limit 3) includes the reading event itself (SPEC §3.3)
    assert col("recent") == [
        ["1.1.1.1"],
        ["2.2.2.2"],
        ["1.1.1.1", "3.3.3.3"],
        ["1.1.1.1", "3.3.3.3", "1.1.1.1"],
        ["3.3.3.3", "1.1.1.1", "4.4.4.4"],
        ["0.0.0.0"],
        ["0.0.0.0", "é"],
    ]
    assert col("last_ip") == col("ip")
    assert col("first_ip") == ["1.1.1.1", "2.2.2.2", "1.1.1.1", "1.1.1.1", "3.3.3.3", "0.0.0.0", "0.0.0.0"]
    assert col("third_ip") == [None, None, None, "1.1.1.1", "4.4.4.4", None, None]
    assert col("before_first") == [None] * 7  # -4 is before the start of at most 3 items
    assert col("n_recent") == [1, 1, 2, 3, 3, 1, 2]
    assert col("n_recent_alias") == col("n_recent")
    # recent[Len(recent) - 2]: the one before the last; with one item the index is -1, the last
    assert col("back_ip") == ["1.1.1.1", "2.2.2.2", "1.1.1.1", "3.3.3.3", "1.1.1.1", "0.0.0.0", "0.0.0.0"]


def test_set_of_tuples(redis_url):
    out = _run(redis_url)
    col = lambda name: [f[name] for f in out]  # noqa: E731
    # Set(ip, user limit 5): distinct (ip, user) of the last 5 logins, ascending
    assert out[4]["pairs"] == [["1.1.1.1", "anna"], ["2.2.2.2", "brad"], ["3.3.3.3", "anna"],
                               ["4.4.4.4", "anna"]]
    # the 6th login pushes out the 1st, but ("1.1.1.1", "anna") is still there from the 4th
    assert out[5]["pairs"] == [["0.0.0.0", "çara😀"], ["1.1.1.1", "anna"], ["2.2.2.2", "brad"],
                               ["3.3.3.3", "anna"], ["4.4.4.4", "anna"]]
    assert col("first_pair_ip") == ["1.1.1.1"] * 5 + ["0.0.0.0"] * 2
    # "é" sorts after the digits: the last pair of the 7th login is ("é", "çara😀")
    assert col("last_pair_user") == ["anna", "brad", "anna", "anna", "anna", "anna", "çara😀"]
    assert col("n_pairs") == [1, 2, 3, 3, 4, 5, 5]
