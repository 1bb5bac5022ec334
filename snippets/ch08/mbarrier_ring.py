# A ring of 2 shared-memory slots carries 5 tiles from a copying warp to a computing warpgroup. Slot s has a
# `ready` barrier (its copy has landed) and a `free` barrier (the computer is done with it). A barrier counts
# completed phases; a wait names the parity (0 or 1) of the phase it waits for.
TILE_BYTES = 128 * 64 * 2  # one fp16 tile: 128 keys x head dim 64
SLOTS, TILES = 2, 5


class MBarrier:
    def __init__(self, name):
        self.name, self.pending, self.tx_bytes, self.phase = name, 1, 0, 0  # one arrival per phase

    def arrive(self, expect_bytes=0):  # expect_bytes: what a copy will bring (PTX arrive.expect_tx)
        self.pending, self.tx_bytes = self.pending - 1, self.tx_bytes + expect_bytes
        self._maybe_complete()

    def complete_tx(self, nbytes):  # the copy engine reports bytes that landed
        self.tx_bytes -= nbytes
        self._maybe_complete()

    def _maybe_complete(self):
        if self.pending == 0 and self.tx_bytes == 0:
            self.phase, self.pending = self.phase + 1, 1  # the phase completes: the parity flips

    def passed(self, parity):  # a fresh barrier counts the phase before phase 0 (parity 1) as complete
        return (self.phase & 1) != parity


def ready_parity(t):  # tile t is use number t // SLOTS of its slot; the parity flips with every use
    return (t // SLOTS) & 1


def free_parity(t):  # the opposite, so that the copier's first wait on each (empty) slot passes
    return ready_parity(t) ^ 1


print("tile                 " + " ".join(str(t) for t in range(TILES)))
print("slot = t % 2         " + " ".join(str(t % SLOTS) for t in range(TILES)))
print("computer waits ready " + " ".join(str(ready_parity(t)) for t in range(TILES)) + "   parity (t // 2) & 1")
print("copier waits free    " + " ".join(str(free_parity(t)) for t in range(TILES)) + "   the opposite")

ready = [MBarrier(f"ready[{s}]") for s in range(SLOTS)]
free = [MBarrier(f"free[{s}]") for s in range(SLOTS)]
copied = computed = 0  # tiles so far
for round_ in range(1, 7):  # each round: the copier goes as far as it can, then the computer, then copies land
    log = {"copier": [], "computer": []}
    in_flight = []
    while copied < TILES and free[copied % SLOTS].passed(free_parity(copied)):
        ready[copied % SLOTS].arrive(expect_bytes=TILE_BYTES)
        in_flight.append(copied % SLOTS)
        log["copier"].append(f"copies tile {copied} into slot {copied % SLOTS}")
        copied += 1
    while computed < TILES and ready[computed % SLOTS].passed(ready_parity(computed)):
        log["computer"].append(f"computes tile {computed}")
        free[computed % SLOTS].arrive()
        computed += 1
    next_waits = {"copier": (free, free_parity, copied), "computer": (ready, ready_parity, computed)}
    for role, (barriers, parity, tile) in next_waits.items():
        wait = f"waits on {barriers[tile % SLOTS].name} for parity {parity(tile)}"
        print(f"round {round_} {role:8s} " + ", ".join(log[role] + [wait if tile < TILES else "done"]))
    for slot in in_flight:
        ready[slot].complete_tx(TILE_BYTES)
print("phases completed:", ", ".join(f"{b.name} {b.phase}" for b in ready + free))
