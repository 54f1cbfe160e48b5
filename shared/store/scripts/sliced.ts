/**
 * Lua: `sliced(command, key, list, from, to)` runs `command key list[from..to]` (no key when
 * `key` is nil) in slices of at most SLICE values, one call each, and returns the sum of the
 * replies. Lua's `unpack` takes some 8,000 values at most ("too many results to unpack"), and a
 * flow of 10,000 jobs adds 20,000 values to the job index at its creation, pushes 10,000 work
 * items when all its jobs are ready at once, and removes as many index entries when it goes.
 * Slices are even, so field/value and score/member pairs stay whole. Costs one command per
 * slice: one for any list of up to 4,000 values.
 */
export const SLICE = 4000;

export const SLICED = `local function sliced(command, key, list, from, to)
  local sum = 0
  for s = from, to, ${SLICE} do
    local e = math.min(s + ${SLICE - 1}, to)
    local reply
    if key then reply = redis.call(command, key, unpack(list, s, e)) else reply = redis.call(command, unpack(list, s, e)) end
    sum = sum + (tonumber(reply) or 0)
  end
  return sum
end`;
