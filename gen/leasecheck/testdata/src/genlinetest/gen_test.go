package genlinetest

//go:generate go tool leasegen
