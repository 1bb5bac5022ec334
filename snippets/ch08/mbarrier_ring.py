# A ring of 2 shared-memory slots carries 5 tiles from a copying warp (the producer) to a computing warpgroup
# (the consumer). Each slot has a `ready` barrier (the copy has landed) and a `free` barrier (the consumer is
# done with it). A barrier counts completed phases; a wait names the parity (0 or 1) of the phase it waits for.
# This simulates the barriers in plain Python and runs the two roles in turns.
TILE_BYTES = 128 * 64 * 2  # one fp16 tile of 128 keys x head dim 64
SLOTS, TILES = 2, 5


class MBarrier:
    def __init__(self, name: str, count: int):
        self.name, self.count = name, count
        self.pending, self.tx_bytes, self.phase = count, 0, 0  # phase: how many phases have completed

    def arrive(self):
        self.pending -= 1
        self._maybe_complete()

    def expect(self, nbytes: int):  # arrive, and say how many bytes a copy will bring
        self.tx_bytes += nbytes
        self.arrive()

    def complete_tx(self, nbytes: int):  # the copy engine reports bytes that landed
        self.tx_bytes -= nbytes
        self._maybe_complete()

    def _maybe_complete(self):
        if self.pending == 0 and self.tx_bytes == 0:
            self.phase += 1  # the phase completes and the parity flips
            self.pending = self.count

    def passed(self, parity: int) -> bool:
        """A wait for `parity` passes once the phase of that parity is the last one completed."""
        return (self.phase & 1) != parity


tiles = range(TILES)
print("tile                 " + " ".join(f"{t}" for t in tiles))
print("slot = t % 2         " + " ".join(f"{t % SLOTS}" for t in tiles))
print("computer waits ready " + " ".join(f"{(t // SLOTS) & 1}" for t in tiles) + "   parity (t // 2) & 1")
print("copier waits free    " + " ".join(f"{((t // SLOTS) & 1) ^ 1}" for t in tiles) + "   parity ((t // 2) & 1) ^ 1")

ready = [MBarrier(f"ready[{s}]", count=1) for s in range(SLOTS)]
free = [MBarrier(f"free[{s}]", count=1) for s in range(SLOTS)]
in_flight = []  # copies issued but not landed yet: (slot, bytes)
done = {"copier": [], "computer": []}  # what each role did this round


def producer():
    for t in range(TILES):
        slot = t % SLOTS
        yield free[slot], ((t // SLOTS) & 1) ^ 1  # a fresh barrier counts phase "1" as complete
        ready[slot].expect(TILE_BYTES)
        in_flight.append((slot, TILE_BYTES))
        done["copier"].append(f"copies tile {t} into slot {slot}")


def consumer():
    for t in range(TILES):
        slot = t % SLOTS
        yield ready[slot], (t // SLOTS) & 1
        done["computer"].append(f"computes tile {t}")
        free[slot].arrive()


roles = {"copier": producer(), "computer": consumer()}
waiting = {name: next(role) for name, role in roles.items()}
for round_ in range(1, 10):
    if not waiting:
        break
    print(f"round {round_}")
    for name in list(waiting):
        barrier, parity = waiting[name]
        while barrier.passed(parity):
            try:
                barrier, parity = roles[name].send(None)
            except StopIteration:
                del waiting[name]
                break
        else:
            waiting[name] = (barrier, parity)
        blocked = f"waits on {barrier.name} for parity {parity}" if name in waiting else "finished"
        print(f"  {name:8s} {', '.join(done[name] + [blocked])}")
        done[name].clear()
    for slot, nbytes in in_flight:  # the copy engine lands what was issued this round
        ready[slot].complete_tx(nbytes)
    in_flight.clear()
print("phases completed:", ", ".join(f"{b.name} {b.phase}" for b in ready + free))
