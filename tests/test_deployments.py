"""The served deployments (flows/deploy.py) and the worker's (prefect.yaml) are the same six:
same flows, schedules, event triggers and concurrency limits."""


import yaml

from checkworthy.config import ROOT
from checkworthy.flows.events import GUIDELINES_UPDATED, LABELS_UPDATED


def test_served_deployments_match_prefect_yaml(monkeypatch):
    for var in ("CHECKWORTHY_PIPELINE_CRON", "CHECKWORTHY_NEW_CLAIMS_INTERVAL", "CHECKWORTHY_WATCH_INTERVAL",
                "CHECKWORTHY_ADAPT_CRON"):
        monkeypatch.delenv(var, raising=False)
    from checkworthy.flows.deploy import deployments

    served = {d.name: d for d in deployments()}
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text(encoding="utf-8"))
    listed = {d["name"]: d for d in spec["deployments"]}
    assert set(served) == set(listed) == {"daily", "hourly", "watch", "on-label-change", "on-label-growth",
                                          "on-guideline-change"}
    for name, d in listed.items():
        s = served[name]
        assert d["entrypoint"].split(":")[1] == s.entrypoint.split(":")[-1], name  # the same flow function
        assert d["concurrency_limit"] == 1
        assert (s.concurrency_limit if isinstance(s.concurrency_limit, int)
                else s.concurrency_limit.limit) == 1, name
        ours = [sch.schedule for sch in s.schedules or []]
        theirs = d.get("schedules", [])
        assert len(ours) == len(theirs), name
        for a, b in zip(ours, theirs):
            if "cron" in b:
                assert a.cron == b["cron"]
            else:
                assert a.interval.total_seconds() == b["interval"]
        ours_t = [(sorted(t.expect), t.match.model_dump() if hasattr(t.match, "model_dump") else dict(t.match),
                   t.parameters) for t in s.triggers]
        theirs_t = [(sorted(t["expect"]), t["match"], t["parameters"]) for t in d.get("triggers", [])]
        assert ours_t == theirs_t, name
    assert served["on-label-change"].triggers[0].expect == {LABELS_UPDATED}
    assert served["on-guideline-change"].triggers[0].expect == {GUIDELINES_UPDATED}
    assert served["on-label-growth"].triggers[0].expect == {LABELS_UPDATED}
    assert served["daily"].parameters == listed["daily"]["parameters"] == {"report": {"prefix": "daily"}}
