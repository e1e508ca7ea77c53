"""``scowl check DIR`` prints every diagnostic of every file, not just the first (SPEC §2.5, §6)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from compiler import compile_dir

ROOT = Path(__file__).resolve().parents[2]

A = """\
event payment
user := $.user as string
amount := $.amount as float
t := $.t as time
total := Sum(amount by usr)
recent := Count(by user last amount)
none := Count(by user limit 0)
decayed := DecayedSum(amount by user after t)
"""

B = """\
event login
user := $.user as string
last_payment := LastTime<payment>(by user)
payments := Count<payment>(by user exclusive)
amounts := Sum<payment, login>(amount by user)
x := (1 +
"""


def test_check_prints_all_errors_of_all_files(tmp_path: Path) -> None:
    (tmp_path / "a.scowl").write_text(A, encoding="utf-8")
    (tmp_path / "b.scowl").write_text(B, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "scowl", "check", str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    expected = compile_dir(tmp_path)
    codes = [d.code for d in expected.diagnostics]
    assert codes == ["E0301", "E0205", "E0208", "E0204", "E0303", "E0209", "E0212", "E0103"], expected.render()
    assert r.stderr == expected.render()  # exactly the compiler's rendering, every error
    assert r.stderr.rstrip().endswith(f"{len(codes)} errors")
    for where in ("a.scowl:5:", "a.scowl:6:", "a.scowl:7:", "a.scowl:8:", "b.scowl:3:", "b.scowl:4:",
                  "b.scowl:5:", "b.scowl:6:"):
        assert where in r.stderr
    assert "hint: did you mean 'user'?" in r.stderr
    assert "hint: did you mean 'LatestTime'?" in r.stderr
