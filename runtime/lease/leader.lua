-- leader: read who holds a lease, for Client.Leader and WatchLeader. It
-- writes nothing.
-- KEYS[1] lock
-- Returns {value, pttl}: value is the lock's value ("identity:token", with
-- "~" in front while a hold-min runs out; a leader's identity ends in
-- "/owner", see key.go), pttl its PTTL; {"", -2} when the key is free.
local v = redis.call('GET', KEYS[1])
if not v then return {'', -2} end
return {v, redis.call('PTTL', KEYS[1])}
