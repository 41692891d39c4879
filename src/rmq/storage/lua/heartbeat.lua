#!lua
--[[
  Record a consumer's heartbeat in its topic's registry, if the topic still exists.

  KEYS[1]  string  the topic's settings (RegistryKeys.settings): gone once delete_topic began
  KEYS[2]  hash    the topic's consumers (RegistryKeys.consumers)
  ARGV[1]  the consumer's id
  ARGV[2]  its heartbeat record (JSON)

  Returns 1 when recorded, 0 when the topic does not exist. A consumer keeps running when
  its topic is deleted (it claims again if the topic is created anew), and its heartbeats
  must not leave a consumers hash behind for a topic that nobody created: delete_topic
  removes the settings before the consumers hash, so a heartbeat either lands before (and
  is deleted with the rest) or finds no settings and writes nothing.

  No flags: a heartbeat grows memory; when Redis is out of memory it is refused whole, as
  the HSET it replaces was.
]]

if rcall("EXISTS", KEYS[1]) == 0 then
  return 0
end
rcall("HSET", KEYS[2], ARGV[1], ARGV[2])
return 1
