"""End-to-end, embedded: a population of ranks 8, 16, 32 and 64 (spec 9, "Mixed ranks") trains, evolves with every
operator (R1's rank change and crossovers of parents of different ranks included), is charged by rank, and shows
each member's rank in the league's REST API and the run report."""

import json

import pytest

from coordinator.run.phases.evolve import _pick_operator
from coordinator.run.phases.run import Run
from populora.config import OPERATORS, load_config
from populora.store import ArtifactStore
from tests.e2e.conftest import e2e_overrides
from tests.e2e.records import train

RANKS = [8, 16, 32, 64]
STEPS = 5
# The operator of each child is drawn from (run seed, run id, step, index) alone: with this seed the ten children of
# five evolutions draw all nine operators, the four crossovers at steps 1 and 2, where members still hold distinct
# ranks (test_the_seed_draws_every_operator checks it without training).
SEED = 28491
RUN_ID = "mixed"


def _config(tmp_path, echo_model):
    mix = ", ".join(f"{op}: 1" for op in OPERATORS)
    return load_config(preset="cpu-tiny", overrides=[
        *e2e_overrides(tmp_path, echo_model), f"run.seed={SEED}", "population.n_teachers=4",
        "population.n_students=4", f"lora.teacher_ranks={RANKS}", f"lora.student_ranks={RANKS[::-1]}",
        "evolution.every_k=1", f"evolution.operator_mix={{{mix}}}", "tasks.proposals_per_teacher=2"], env=False)


def test_the_seed_draws_every_operator(tmp_path):
    cfg = _config(tmp_path, "tiny")
    run = Run(RUN_ID, cfg, None, None)
    draws = [_pick_operator(run, step, i) for step in range(1, STEPS + 1) for i in (0, 1)]
    assert set(draws) == set(OPERATORS)
    assert set(draws[:4]) == {"X1", "X2", "X3", "X4"}


@pytest.mark.slow
def test_a_population_of_mixed_ranks_trains_evolves_and_shows_its_ranks(tmp_path, echo_model):
    from services.league.rest import LeagueRestServer
    from tests.league.conftest import serve_league

    cfg = _config(tmp_path, echo_model)
    assert cfg.ranks == RANKS and cfg.serving_rank == 64
    state, run_dir = train(cfg, RUN_ID, STEPS)
    store = ArtifactStore(cfg.store_root)

    # the members start at their configured ranks, from the run's one warm start or fresh
    init = state.get(RUN_ID, 0, "init")["population"]
    assert sorted(store.rank(a) for a in init if ".T" in a) == RANKS == sorted(store.rank(a) for a in init if ".S" in a)

    # every operator made a child; R1 changed its parent's rank to a neighbouring one of the run's, and each
    # crossover joined parents of different ranks at least once; the events record the ranks the store holds
    events = [e for s in range(1, STEPS + 1) for e in state.get(RUN_ID, s, "evolve")["events"]]
    assert {e["operator"] for e in events} == set(OPERATORS)
    for e in events:
        assert e["rank"] == store.rank(e["child"]) and e["parent_ranks"] == [store.rank(p) for p in e["parents"]]
        if e["operator"] == "R1":
            assert e["rank"] != e["parent_ranks"][0] and e["rank"] in RANKS
            assert abs(RANKS.index(e["rank"]) - RANKS.index(e["parent_ranks"][0])) == 1
        elif e["operator"].startswith("X"):
            assert e["rank"] == e["parent_ranks"][0]  # the default rule: the better parent's rank
        else:
            assert e["rank"] == e["parent_ranks"][0]
        assert e["relative_change"] >= 0
    for op in ("X1", "X2", "X3", "X4"):
        assert any(e["operator"] == op and len(set(e["parent_ranks"])) == 2 for e in events), op
    # every member trained at its rank after evolution too: its last version is a PEFT adapter of that rank
    final = state.get(RUN_ID, STEPS, "evolve")["population"]
    for adapter_id, member in final.items():
        assert store.read(store.ref(adapter_id, member["version"])).rank == store.rank(adapter_id)
    assert len({store.rank(a) for a in final}) > 1

    # compute is charged at each adapter's own rank: a rank-64 member's token costs more than a rank-8 one's
    spent = state.get(RUN_ID, 1, "account")["adapters"]
    per_token = {store.rank(a): u["flops"] / (u["prompt_tokens"] + u["generated_tokens"] + 3 * u["trained_tokens"])
                 for a, u in spent.items() if u["flops"]}
    ordered = [per_token[r] for r in sorted(per_token)]
    assert len(ordered) > 1 and ordered == sorted(ordered) and ordered[0] < ordered[-1]

    # the league's REST API shows every adapter's rank: leaderboard, lineage, adapter page
    server: LeagueRestServer = serve_league(cfg.league_db_url)
    try:
        import urllib.request

        def get(path):
            with urllib.request.urlopen(server.url.rstrip("/") + path, timeout=30) as resp:
                return json.load(resp)

        board = get(f"/v1/runs/{RUN_ID}/leaderboard")["rows"]
        assert board and all(r["lora_rank"] == store.rank(r["adapter_id"]) for r in board)
        nodes = get(f"/v1/runs/{RUN_ID}/lineage")["nodes"]
        assert {n["adapter_id"]: n["lora_rank"] for n in nodes} == {r["adapter_id"]: r["lora_rank"] for r in board}
        child = events[0]["child"]
        assert get(f"/v1/adapters/{child}")["adapter"]["rank"] == events[0]["rank"]
    finally:
        server.stop()

    # and the report (as `populora train` writes it): each member's rank, each child's ranks
    from coordinator.record.report import write_report

    report = write_report(run_dir, cfg).read_text()
    for adapter_id, member in final.items():
        assert (f"<td>{adapter_id}</td><td>{member['role']}</td><td>v{member['version']}</td>"
                f"<td>{store.rank(adapter_id)}</td>") in report
    assert "LoRA rank (parents → child)" in report
    assert f"{', '.join(map(str, events[0]['parent_ranks']))} → {events[0]['rank']}" in report
