"""Plans: the demo and SPEC §3.4 topologies, windows, hashes, ordering, scopes (SPEC §2.4, §3.2, §5.4)."""

from __future__ import annotations

from compiler.plan import Expr, Plan

from _compiler_helpers import DEMO, compile_err, compile_ok

LOGIN = """
event login
user := $.user as string
ip := $.ip as string
price := $.price as float
c := Count()
c_ip := Count(by ip)
c_ip_user := Count(by ip, user)
cu := CountUnique(user)
cu_ip := CountUnique(user by ip)
s := Sum(price)
s_user := Sum(price by user)
s_user_ex := Sum(price by user exclusive)
"""


# ------------------------------------------------------------------ demo
def test_demo_topology_plan() -> None:
    plan = compile_ok(DEMO)
    assert sorted(plan.events) == ["arrival", "departure", "weather_obs"]
    dep = plan.events["departure"]
    names = [f.name for f in dep.features]
    assert names == [
        "carrier", "flight", "tailnum", "origin", "dest", "dep_delay", "distance", "delayed", "route",
        "departures_1h", "delayed_3h", "avg_delay_route_7d", "max_delay_carrier_1d", "miles_tail_30d",
        "dests_10m", "prev_dep_time", "prev_flight", "visib", "arrivals_1h", "mins_since_prev",
    ]
    types = {f.name: f.type for f in dep.features}
    assert types["delayed"] == "bool" and types["route"] == "string"
    assert types["departures_1h"] == "int" and types["avg_delay_route_7d"] == "float"
    assert types["max_delay_carrier_1d"] == "float" and types["miles_tail_30d"] == "int"
    assert types["dests_10m"] == "int" and types["prev_dep_time"] == "time"
    assert types["prev_flight"] == "struct{flight:int,dest:string}"
    assert types["visib"] == "float" and types["arrivals_1h"] == "int"
    assert types["mins_since_prev"] == "float"

    distance = dep.feature("distance").input
    assert distance.path == ("distance",) and distance.has_default and distance.default == 0
    tail = dep.feature("tailnum").input
    assert tail.optional and not tail.has_default

    win = {f.name: (f.aggregate.window_s, f.aggregate.resolution_s) for f in dep.features if f.aggregate}
    assert win == {
        "departures_1h": (3600, 1), "delayed_3h": (10800, 1), "avg_delay_route_7d": (604800, 60),
        "max_delay_carrier_1d": (86400, 60), "miles_tail_30d": (2592000, 60), "dests_10m": (600, 1),
        "prev_dep_time": (2592000, 60), "prev_flight": (172800, 60), "visib": (10800, 1),
        "arrivals_1h": (3600, 1),
    }

    visib = dep.feature("visib").aggregate
    assert visib.scopes == ("weather_obs",) and visib.read_keys == ("origin",)
    assert dep.feature("visib").deps == ("origin",)
    vstate = plan.states[visib.definition_hash]
    assert set(vstate.writes) == {"weather_obs"}
    assert vstate.writes["weather_obs"].keys == ("origin",)
    assert vstate.writes["weather_obs"].values == ("visib",)

    arr = dep.feature("arrivals_1h").aggregate
    assert arr.scopes == ("arrival",) and arr.read_keys == ("origin",) and not arr.exclusive
    astate = plan.states[arr.definition_hash]
    assert astate.writes["arrival"].keys == ("dest",) and astate.key_types == ("string",)
    assert plan.events["arrival"].writes == (arr.definition_hash,)
    assert plan.events["weather_obs"].writes == (visib.definition_hash,)

    prev = dep.feature("prev_flight")
    assert prev.aggregate.exclusive and prev.aggregate.value_names == ("flight", "dest")
    assert prev.deps == ("dest", "flight", "tailnum")
    delayed_3h = dep.feature("delayed_3h")
    assert delayed_3h.deps == ("delayed", "origin")
    dstate = plan.states[delayed_3h.aggregate.definition_hash]
    assert dstate.writes["departure"].where == Expr("ref", "bool", name="delayed")

    assert len(plan.states) == 10
    assert len(dep.writes) == 8 and list(dep.writes) == sorted(dep.writes)
    mins = dep.feature("mins_since_prev").expr
    assert mins.kind == "call" and mins.op == "Minutes"
    assert mins.args[0].op == "sub" and mins.args[0].type == "duration"
    assert mins.args[0].args[0] == Expr("call", "time", op="EventTime")


def test_plan_json_round_trip() -> None:
    plan = compile_ok(DEMO)
    doc = plan.to_json()
    assert Plan.from_json(doc).to_json() == {
        **doc,
        "events": {e: {**v, "features": [{k: x for k, x in f.items() if k != "span"} for f in v["features"]]}
                   for e, v in doc["events"].items()},
    }
    agg = next(f for f in doc["events"]["departure"]["features"] if f["name"] == "visib")
    for key in ("function", "scopes", "window_s", "resolution_s", "limit", "definition_hash"):
        assert key in agg


# --------------------------------------------------------------- SPEC §3.4
def test_login_topology() -> None:
    plan = compile_ok(LOGIN)
    ev = plan.events["login"]
    aggs = {f.name: f.aggregate for f in ev.features if f.aggregate}
    assert aggs["c"].read_keys == () and aggs["c_ip_user"].read_keys == ("ip", "user")
    assert aggs["cu_ip"].value_names == ("user",)
    assert ev.feature("s").type == "float"
    # exclusive is read-time only: one shared state
    assert aggs["s_user"].definition_hash == aggs["s_user_ex"].definition_hash
    assert aggs["s_user_ex"].exclusive and not aggs["s_user"].exclusive
    assert len(plan.states) == 7
    assert set(ev.writes) == set(plan.states)
    assert plan.states[aggs["c"].definition_hash].key_types == ()
    assert all(a.scopes == ("login",) for a in aggs.values())


# ---------------------------------------------------------------- windows
def test_windows_and_resolutions() -> None:
    plan = compile_ok("""
event e
a := Count(last 10 minutes)
b := Count(last 1 day)
c := Count()
d := Count(last 1000 days)
e2 := Count(last PT5H30M)
f := Count(last week)
g := Count(last 2.5 hours)
h := Count(last 1 day + 12 hours)
i := Count(last 1 second)
""")
    got = {f.name: (f.aggregate.window_s, f.aggregate.resolution_s) for f in plan.events["e"].features}
    assert got == {
        "a": (600, 1), "b": (86400, 60), "c": (2592000, 60), "d": (86400000, 86400),
        "e2": (19800, 1), "f": (604800, 60), "g": (9000, 1), "h": (129600, 60), "i": (1, 1),
    }


def test_limits() -> None:
    plan = compile_ok("""
event e
x := $.x as int
s := Sequence(x)
t := Set(x limit 5)
u := Latest(x limit 3)
v := Count()
""")
    lim = {f.name: f.aggregate.limit for f in plan.events["e"].features if f.aggregate}
    assert lim == {"s": 100, "t": 5, "u": 3, "v": None}
    types = {f.name: f.type for f in plan.events["e"].features}
    assert types["s"] == "array<int>" and types["t"] == "array<int>"


def test_result_types_of_all_aggregates() -> None:
    plan = compile_ok("""
event e
i := $.i as int
f := $.f as float
s := $.s as string
t := $.t as time
a1 := Count(i, s)
a2 := CountUnique(i, s)
a3 := Sum(i)
a4 := Sum(f)
a5 := Min(s)
a6 := Max(t)
a7 := Average(i)
a8 := Latest(i)
a9 := First(i, s)
b1 := LatestTime()
b2 := FirstTime(after t)
b3 := Sequence(i, s)
b4 := Set(i, s)
b5 := DecayedCount(last 1 hour)
b6 := DecayedSum(i)
b7 := DecayedAverage(f)
b8 := HyperLogLog(s, i)
""")
    types = {f.name: f.type for f in plan.events["e"].features if f.kind == "aggregate"}
    assert types == {
        "a1": "int", "a2": "int", "a3": "int", "a4": "float", "a5": "string", "a6": "time",
        "a7": "float", "a8": "int", "a9": "struct{i:int,s:string}", "b1": "time", "b2": "time",
        "b3": "array<struct{i:int,s:string}>", "b4": "array<tuple{int,string}>", "b5": "float",
        "b6": "float", "b7": "float", "b8": "int",
    }
    b2 = plan.events["e"].feature("b2")
    assert b2.aggregate.after == "t" and "t" in b2.deps


# ----------------------------------------------------------------- hashes
RENAME_A = """
event order
customer := $.customer as string
amount := $.amount as float
big := amount > 100
total := Sum(amount by customer where big last 7 days)
"""
RENAME_B = """
event order
buyer := $.customer as string
value := $.amount as float
is_big := value > 100
spend_7d := Sum(value by buyer where is_big last 7 days)
"""


def _hash(plan: Plan, event: str, feature: str) -> str:
    return plan.events[event].feature(feature).aggregate.definition_hash


def test_hash_stable_across_renames() -> None:
    a = _hash(compile_ok(RENAME_A), "order", "total")
    b = _hash(compile_ok(RENAME_B), "order", "spend_7d")
    assert a == b and len(a) == 16 and int(a, 16) >= 0


def test_hash_changes_with_definition() -> None:
    base = _hash(compile_ok(RENAME_A), "order", "total")
    variants = [
        RENAME_A.replace("last 7 days", "last 8 days"),
        RENAME_A.replace("amount > 100", "amount > 101"),
        RENAME_A.replace("$.amount", "$.price"),
        RENAME_A.replace("$.customer as string", "$.customer as string?"),
        RENAME_A.replace("Sum(", "Average("),
        RENAME_A.replace(" where big", ""),
        RENAME_A.replace("event order", "event purchase"),
        RENAME_A.replace("last 7 days", "last 7 days limit 10"),
    ]
    hashes = set()
    for v in variants:
        plan = compile_ok(v)
        ev = next(iter(plan.events))
        hashes.add(_hash(plan, ev, "total"))
    assert base not in hashes and len(hashes) == len(variants)


def test_shared_state_across_reading_events() -> None:
    plan = compile_ok("""
event click
user := $.user as string
n := Count<click>(by user last 1 hour)

event view
who := $.user as string
n_clicks := Count<click>(by who as user last 1 hour)
""")
    h1 = _hash(plan, "click", "n")
    h2 = _hash(plan, "view", "n_clicks")
    assert h1 == h2 and len(plan.states) == 1
    assert plan.events["click"].writes == (h1,) and plan.events["view"].writes == ()
    assert plan.events["view"].feature("n_clicks").deps == ("who",)


def test_aggregate_of_aggregate_hash_inlines_definition() -> None:
    src = """
event e
k := $.k as string
n := Count(by k last 1 hour)
m := Max(n by k)
"""
    a = _hash(compile_ok(src), "e", "m")
    b = _hash(compile_ok(src.replace("last 1 hour)", "last 2 hours)")), "e", "m")
    c = _hash(compile_ok(src.replace("n := ", "cnt := ").replace("Max(n", "Max(cnt")), "e", "m")
    assert a != b and a == c


# -------------------------------------------------------------- ordering
def test_dependency_order_is_stable() -> None:
    plan = compile_ok("""
event e
z := y + 1
a := 1
y := x * 2
x := $.x as int
b := a + 1
""")
    assert [f.name for f in plan.events["e"].features] == ["a", "x", "y", "z", "b"]
    assert plan.events["e"].feature("z").deps == ("y",)


def test_aggregate_writer_dependencies_make_cycles() -> None:
    res = compile_err("""
event e
x := Count(y)
y := x + 1
""")
    assert [d.code for d in res.diagnostics] == ["E0306"]
    assert "x -> y -> x" in res.diagnostics[0].message


def test_cross_event_reader_has_no_write_deps() -> None:
    # y reads a state written by `f`; x in `f` depends on nothing from `e`: no cycle
    plan = compile_ok("""
event e
k := $.k as string
y := Count<f>(by k where flag)

event f
k := $.k as string
flag := $.flag as bool
""")
    assert plan.events["e"].feature("y").deps == ("k",)
    state = plan.states[_hash(plan, "e", "y")]
    assert state.writes["f"].where == Expr("ref", "bool", name="flag")


# ------------------------------------------------------------------ scopes
def test_cross_event_scope_with_two_writers() -> None:
    plan = compile_ok("""
event a
user := $.user as string
amt := $.amt as int

event b
user := $.u as string
amt := $.value as int
ok := $.ok as bool

event q
user := $.user as string
total := Sum<a, b>(amt by user where amt > 0 last 1 day)
mine := Sum<q, a>(amt by user)
amt := $.amt as int
""")
    total = plan.events["q"].feature("total")
    assert total.type == "int" and total.aggregate.scopes == ("a", "b")
    st = plan.states[total.aggregate.definition_hash]
    assert set(st.writes) == {"a", "b"}
    assert st.writes["b"].where.args[0] == Expr("ref", "int", name="amt")
    assert total.aggregate.definition_hash in plan.events["a"].writes
    assert total.aggregate.definition_hash in plan.events["b"].writes
    assert total.deps == ("user",)
    mine = plan.events["q"].feature("mine")
    assert mine.aggregate.scopes == ("a", "q") and mine.deps == ("amt", "user")
    assert set(plan.events["q"].writes) == {mine.aggregate.definition_hash}


def test_scope_of_only_reading_event_is_common() -> None:
    plan = compile_ok("""
event e
k := $.k as string
a := Count<e>(by k exclusive)
b := Count(by k)
""")
    assert _hash(plan, "e", "a") == _hash(plan, "e", "b")


def test_by_as_write_key() -> None:
    plan = compile_ok("""
event payment
payer := $.payer as string
payee := $.payee as string
received := Count(by payer as payee last 1 day)
sent := Count<transfer>(by payer as src, payee as dst)

event transfer
src := $.from as string
dst := $.to as string
""")
    rec = plan.events["payment"].feature("received")
    st = plan.states[rec.aggregate.definition_hash]
    assert rec.aggregate.read_keys == ("payer",)
    assert st.writes["payment"].keys == ("payee",)
    assert rec.deps == ("payee", "payer")
    sent = plan.events["payment"].feature("sent")
    st2 = plan.states[sent.aggregate.definition_hash]
    assert sent.aggregate.read_keys == ("payer", "payee")
    assert st2.writes["transfer"].keys == ("src", "dst") and st2.key_types == ("string", "string")


def test_sections_reopen_across_files() -> None:
    plan = compile_ok({
        "b/second.scowl": "event e\ny := x + 1\n",
        "a.scowl": "event e\nx := $.x as int\nevent f\nz := 1\n",
    })
    assert [f.name for f in plan.events["e"].features] == ["x", "y"]
    assert plan.events["e"].feature("x").span.file == "a.scowl"
    assert plan.events["e"].feature("y").span.file == "b/second.scowl"


def test_a_storage_layout_version_moves_only_its_states_to_a_new_namespace(monkeypatch):
    """SPEC §5.4: a function whose stored layout changes (registry ``layout`` > 1) gets new definition
    hashes, so no store written under the old layout is read as the new one; other states keep theirs."""
    import dataclasses

    from compiler.algebra import registry

    text = """event e
k := $.k as string
v := $.v as int
n := Count(by k last 1 hour)
s := Sum(v by k last 1 hour)
u := CountUnique(v by k last 1 hour)
q := CountUnique(v by k last 1 hour limit 3)
"""

    def hashes():
        ev = compile_ok(text).events["e"]
        return {f: ev.feature(f).aggregate.definition_hash for f in ("n", "s", "u", "q")}

    before = hashes()
    assert registry.layout_of("CountUnique", None) == 2 and registry.layout_of("CountUnique", 3) == 1
    monkeypatch.setitem(registry.REGISTRY, "Count", dataclasses.replace(registry.REGISTRY["Count"], layout=2))
    monkeypatch.setitem(registry.REGISTRY, "CountUnique",
                        dataclasses.replace(registry.REGISTRY["CountUnique"], layout=3))
    after = hashes()
    assert after["n"] != before["n"] and after["u"] != before["u"]
    assert after["s"] == before["s"] and after["q"] == before["q"]  # a write log's layout is the log's
