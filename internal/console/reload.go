package console

// Reload reads the policy file now, as Watch does at its next tick: a rule the terminal just
// wrote into the file is then shown by :review at once.
func (c *Console) Reload() error {
	_, err := c.reload()
	return err
}
