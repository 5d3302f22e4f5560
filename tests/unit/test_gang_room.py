"""Room for a gang (issue 36 item 3): every member fits at once after the moves, on GPUs of its own;
the member that cannot fit is named with its reason; limits hold for the gang's moves together."""

from __future__ import annotations

from dataclasses import replace

from hami_place_core.fit import gpu_fit_reason
from hami_place_core.planning import PlanOptions, apply_moves
from hami_place_core.planning.gang_room import GangRoom, make_room_for_gang
from hami_place_core.planning.room import RoomRequest, parse_room_request
from hami_place_core.state import ClusterState, build_state
from tests.planner_fixtures import node, pod, replay


def scattered(nodes: int = 4, gpus: int = 4) -> ClusterState:
    # Every node has its GPUs 0 and 2 taken by a 1-GPU pod: 2 whole GPUs free per node, never 4.
    pods = [pod(f"p{n}-{i}", f"n{n}", (i,), 100) for n in range(nodes) for i in (0, 2)]
    return build_state([node(f"n{n}", gpus) for n in range(nodes)], pods)


def members(text: str, n: int) -> list[RoomRequest]:
    return [replace(parse_room_request(text), name=f"ml/w-{i}") for i in range(n)]


def assert_all_fit_at_once(state: ClusterState, room: GangRoom) -> None:
    assert room.ok, room.reason
    replay(state, room.moves)
    after = apply_moves(state, room.moves)
    taken: set[str] = set()
    for m in room.members:
        n = after.nodes[m.node]
        for uuid in m.uuids:
            assert uuid not in taken, f"{m.name} shares {uuid} with another member"
            taken.add(uuid)
            gpu = n.by_uuid(uuid)
            assert gpu is not None and gpu_fit_reason(parse_room_request("gpus=1").gpu, gpu, n.usage[uuid]) is None


def test_two_four_gpu_members_get_two_nodes_made_whole() -> None:
    state = scattered()
    room = make_room_for_gang(state, members("gpus=4", 2))
    assert_all_fit_at_once(state, room)
    assert len(room.moves) == 4  # two pods off each of two nodes, onto the other two
    assert len({m.node for m in room.members}) == 2
    assert sum(m.moves for m in room.members) == len(room.moves)


def test_members_that_fit_already_take_different_gpus_and_no_move() -> None:
    state = scattered()
    room = make_room_for_gang(state, members("gpus=2", 4))
    assert_all_fit_at_once(state, room)
    assert room.moves == ()


def test_a_gang_that_cannot_fit_names_the_member_and_the_binding_constraint_and_moves_nothing() -> None:
    state = scattered()  # 16 GPUs, 8 used: room for two 4-GPU members, never three
    room = make_room_for_gang(state, members("gpus=4", 3))
    assert not room.ok and room.moves == ()
    assert "member 3 of 3 (ml/w-" in room.reason and "cannot fit" in room.reason
    assert room.as_dict()["fits"] is False


def test_max_moves_holds_for_the_gang_together() -> None:
    state = scattered()
    room = make_room_for_gang(state, members("gpus=4", 2), PlanOptions(max_moves=3))
    assert not room.ok and "member 2 of 2" in room.reason
    assert make_room_for_gang(state, members("gpus=4", 2), PlanOptions(max_moves=4)).ok


def test_a_member_already_reserved_is_never_moved_for_the_next() -> None:
    state = scattered()
    room = make_room_for_gang(state, members("gpus=4", 2))
    moved = {m.pod for m in room.moves}
    assert not any(name.startswith("ml/w-") for name in moved)


def test_the_largest_member_is_served_first_when_that_needs_fewer_moves() -> None:
    # n0 has 4 whole GPUs, n1 two. The 4-GPU member must take n0; served second (as given), the
    # 1-GPU member would take n0 first by best fit and cost moves.
    state = build_state([node("n0", 4), node("n1", 4)], [pod("a", "n1", (0,), 100), pod("b", "n1", (1,), 100)])
    small = replace(parse_room_request("gpus=1"), name="ml/small")
    big = replace(parse_room_request("gpus=4"), name="ml/big")
    room = make_room_for_gang(state, [small, big])
    assert_all_fit_at_once(state, room)
    assert room.moves == ()
    assert {m.name: m.node for m in room.members} == {"ml/big": "n0", "ml/small": "n1"}


def test_hypothetical_members_are_named_member_n_and_the_plan_reads_as_json() -> None:
    state = scattered()
    room = make_room_for_gang(state, [parse_room_request("gpus=4")] * 2)
    assert [m.name for m in room.members] == ["gang/member-1", "gang/member-2"]
    out = room.as_dict()
    assert out["wanted"] == 2 and len(out["members"]) == 2 and len(out["moves"]) == 4


def test_the_state_is_not_modified_and_an_empty_gang_needs_nothing() -> None:
    state = scattered()
    before = {k: (a.node, dict(a.per_gpu)) for k, a in state.pods.items()}
    make_room_for_gang(state, members("gpus=4", 2))
    assert {k: (a.node, dict(a.per_gpu)) for k, a in state.pods.items()} == before
    assert make_room_for_gang(state, []).ok
