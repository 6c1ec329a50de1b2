-- Issue 28: the production schema carries no fault injection. The `fault_flags` table and the
-- trigger that made every dead-letter insert fail while a row named `dead_letter_store_outage`
-- existed are gone; the dead-letter-store outage test installs its own failing trigger in its
-- throwaway database and removes it again (tests/api/dead_letters.rs).
DROP TRIGGER IF EXISTS dead_letters_outage;
DROP TABLE IF EXISTS fault_flags;
