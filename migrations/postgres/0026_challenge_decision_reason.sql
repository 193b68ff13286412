-- The reason the person who decided a challenge gave (at most 500 characters; NULL when none),
-- kept with the challenge so that `GET /v1/policy-challenges/{id}` and `acp challenges show`
-- answer it beside who decided and when (it is in the decision's audit event too).
ALTER TABLE policy_challenges ADD COLUMN decision_reason TEXT;
