# Chapter 13: the share of its copy reference that a decode step reaches when it pays a fixed time on top of its
# reading. The model: the step takes F + B / R for B bytes of K and V read at the copy's rate R, and its copy
# reference (the time a copy takes to move the same bytes) is B / R.
# Run: python snippets/ch13/fixed_cost.py
MiB = 2**20
rate = 4.8e12  # bytes per second: the H200's memory bandwidth (datasheet), standing in for the copy's rate
print("fixed cost | K+V     | reading  | share")
for fixed_us in (8.0, 4.0):  # two example fixed costs, in microseconds (chapter 13 measures the real ones)
    for mib in (4, 32, 128, 256):  # K and V of one decode step: sizes of chapter 12's rows
        read_us = mib * MiB / rate * 1e6
        print(f"{fixed_us:7.0f} us | {mib:3d} MiB | {read_us:5.1f} us | {read_us / (fixed_us + read_us):4.0%}")
for fixed_us in (8.0, 4.0):
    # share = reading / (fixed + reading) >= 0.6  <=>  reading >= 1.5 x fixed
    print(f"a share of 60% with a fixed cost of {fixed_us:.0f} us needs a reading of at least {1.5 * fixed_us:.0f} us: "
          f"{1.5 * fixed_us * 1e-6 * rate / MiB:.0f} MiB or more")
