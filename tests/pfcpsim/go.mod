module vecgate.test/pfcpsim

go 1.25.0

require github.com/omec-project/pfcpsim v1.4.4

require (
	github.com/urfave/cli/v3 v3.8.0 // indirect
	github.com/wmnsk/go-pfcp v0.0.24 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.41.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
	google.golang.org/grpc v1.80.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
