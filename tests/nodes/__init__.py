"""The node layer: the agent through a transport that is not ssh, and hot start's warm pools."""
