package store

import (
	"context"
	"fmt"
)

// ClaimMail records (for `persyst site --mail`) that the mail of kind for period goes to recipient, before it is
// sent; it says false when one was claimed before (sent, or being sent by another run):
// a recipient gets a period's mail of a kind once, whatever runs. A mail that could not
// be sent is given back with ReleaseMail; a run that stops between the claim and the
// mail leaves it claimed (a mail lost, never one sent twice).
func (a Admin) ClaimMail(ctx context.Context, period, kind, recipient string) (bool, error) {
	res, err := a.s.w.ExecContext(ctx, `INSERT INTO mails_sent (period, kind, recipient, sent_ts) VALUES (?, ?, ?, ?)
		ON CONFLICT DO NOTHING`, period, kind, recipient, a.s.now().Unix())
	if err != nil {
		return false, fmt.Errorf("store: claim the %s mail of %s to %s: %w", kind, period, recipient, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ReleaseMail gives back a claim whose mail was not sent.
func (a Admin) ReleaseMail(ctx context.Context, period, kind, recipient string) error {
	if _, err := a.s.w.ExecContext(ctx, `DELETE FROM mails_sent WHERE period = ? AND kind = ? AND recipient = ?`, period, kind, recipient); err != nil {
		return fmt.Errorf("store: release the %s mail of %s to %s: %w", kind, period, recipient, err)
	}
	return nil
}
