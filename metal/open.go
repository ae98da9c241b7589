package metal

// Open returns a backend on the system's default GPU, with the device's
// default policy and the environment's overrides. Without Metal (any OS
// but macOS, or a Mac without a usable GPU) it returns an error that says so.
func Open() (*Backend, error) {
	dev, err := openDevice()
	if err != nil {
		return nil, err
	}
	p, err := DefaultPolicy(dev.info()).WithEnv()
	if err != nil {
		dev.close()
		return nil, err
	}
	return newBackend(dev, p), nil
}
