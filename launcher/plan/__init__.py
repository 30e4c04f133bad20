"""Pure planning: facts + request -> Plan. Nothing here reads the environment, spawns or sleeps."""
