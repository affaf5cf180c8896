package resources

type EndpointsCounter interface {
	ReadyCount() (int, error)
	NotReadyCount() (int, error)
}
