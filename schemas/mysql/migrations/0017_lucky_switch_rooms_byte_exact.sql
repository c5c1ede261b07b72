-- lucky_switches.scope_id holds the room of room_scope_paused and
-- pilot_room, which the draws compare by its bytes (0015 made every other
-- id the draw service keys on byte exact; this one was left out). Under
-- the default case-insensitive collation `switch room_scope_paused on
-- --room R1` beside r1's pause updated r1's row (R1 drew on), and
-- `switch ... default --room R1` deleted r1's pause. The table holds a
-- few rows per app: the primary key's ALTER copies it at once.
ALTER TABLE lucky_switches
  MODIFY scope_id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';
