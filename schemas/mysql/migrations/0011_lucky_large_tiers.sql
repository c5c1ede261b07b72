-- Large tiers by the rule (issue 31): a tier the rule file marks
-- `large: true` is what large_tier_enabled=false switches off. Part of a
-- version's immutable content (a republish compares it). A version that
-- marks no tier keeps the old rule: lucky.large_tier_min_reward decides.
ALTER TABLE lucky_reward_tiers ADD COLUMN large BOOLEAN NOT NULL DEFAULT FALSE;
